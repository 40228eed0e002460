from corral_common.web.serving import serve
from corral_image_service.app import create_app
from corral_image_service.settings import ImageServiceSettings


def main() -> None:
    settings = ImageServiceSettings()
    serve(create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level)


if __name__ == "__main__":
    main()
